# The compose test's S3 API server (scripts/compose_test.py with BOXCAR_COMPOSE_STORE=1): moto's
# server mode from PyPI, on the local base image (MinIO's server cannot be had from the registries
# here). Keeps objects in memory: a stopped container loses them.
ARG BASE_IMAGE=localhost/boxcar-base:trixie
FROM ${BASE_IMAGE}
ARG CA_BUNDLE=
RUN if [ -n "$CA_BUNDLE" ]; then export PIP_CERT="$CA_BUNDLE"; fi \
 && python3 -m venv /opt/moto \
 && /opt/moto/bin/pip install --no-cache-dir --disable-pip-version-check "moto[server]==5.2.5" \
 && rm -rf /root/.cache
EXPOSE 9000
