"""OpenID Connect login for the web UI (README "Single sign-on").

With ``OIDC_ISSUER`` set, the login page offers "Sign in with single sign-on": ``/login/oidc``
sends the browser to the provider with the authorization-code flow (PKCE S256, a random ``state``
and ``nonce``), ``/login/oidc/callback`` takes the code back, exchanges it at the token endpoint,
verifies the ID token (signature against the provider's JWKS, ``iss``, ``aud``, ``exp``, ``iat``,
``nonce``, ``at_hash``, ``azp``: Authlib's ``CodeIDToken`` over joserfc), reads the user name
from ``OIDC_USERNAME_CLAIM`` (the ID token's, else the userinfo endpoint's for the same ``sub``),
finds the user bound to the provider account (``iss`` and ``sub``), else binds the existing user of
that name (only with ``OIDC_LINK_EXISTING_USERS``) or creates one bound to it (``OIDC_CREATE_USERS``):
``accounts.sso_user_id`` has the rule. Then it starts an ordinary session, with the cookie password
login sets.

Where the flow waits: ``state``, ``nonce``, the PKCE ``code_verifier`` and the page to return to
are kept in the browser, in one HttpOnly ``SameSite=Lax`` cookie scoped to ``/login/oidc``,
encrypted and authenticated with Fernet (``FlowSealer``: a key derived from ``SECRET_KEY`` the way
``app.csrf_secret`` derives the CSRF key, so every ingest replica can read it) and refused after
``FLOW_SECONDS``. Nothing is written to the database before the login succeeds, and the cookie is
deleted at the callback, whatever its outcome.

Every failure (provider unreachable, a tampered or stale ``state``, consent denied, a token that
does not verify, no user name, a disabled user) shows the login page with a sentence saying what
happened and a 4xx (502 when the provider is the trouble); the details go to the log.

Egress: these requests go to the issuer the operator configured (and the endpoints its discovery
document names), not to addresses taken from archived content, so they do not pass through
``boxcar.shared.egress`` (whose private-address rule would refuse the usual homelab provider on
the LAN). They never follow redirects, and discovery must name the configured issuer.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import anyio.to_thread
import httpx
from cryptography.fernet import Fernet, InvalidToken
from litestar import Controller, Request, get
from litestar.response import Redirect, Template

from boxcar.ingest import routes
from boxcar.ingest.web import accounts
from boxcar.ingest.web.accounts import SESSION_COOKIE
from boxcar.ingest.web.pages import QueryStr, _safe_next, render
from boxcar.shared import secrets
from boxcar.shared.settings import Settings

if TYPE_CHECKING:
    from joserfc.jwk import KeySet

# Authlib and joserfc (150 modules, 4.4 MiB, 50 ms) are imported by the methods that use them, on
# the first single sign-on: every process that serves the API would load them, and most
# deployments never turn single sign-on on.

log = logging.getLogger("boxcar.ingest.web.sso")

#: the cookie the flow waits in between ``/login/oidc`` and its callback
FLOW_COOKIE = "boxcar_oidc"
#: seconds a started single sign-on may take (the provider's login, two-factor, consent)
FLOW_SECONDS = 600
#: seconds the provider's discovery document and keys are kept before they are fetched again
METADATA_SECONDS = 3600
#: seconds one request to the provider may take
HTTP_TIMEOUT = 10.0
#: seconds of clock difference with the provider tolerated for ``exp``/``iat``
LEEWAY = 60


class SSOError(Exception):
    """A single sign-on that failed: ``str()`` is the sentence for the login page,
    ``status_code`` the answer's status (4xx, or 502 when the provider is the trouble)."""

    def __init__(self, message: str, status_code: int = 400) -> None:
        super().__init__(message)
        self.status_code = status_code


@dataclass(frozen=True)
class Flow:
    """What a started login waits with: ``state``, ``nonce``, the PKCE ``verifier`` and the
    local path to return to (``next``)."""

    state: str
    nonce: str
    verifier: str
    next: str = "/"


class FlowSealer:
    """Seals a ``Flow`` into a cookie value and opens it again (Fernet: AES-CBC + HMAC-SHA256,
    with its issue time, so an old one is refused).

    Args:
        settings: ``SECRET_KEY`` (or the key file in ``DATA_DIR``) the key is derived from.
    """

    def __init__(self, settings: Settings) -> None:
        material = secrets.key_material(settings.data_dir, settings.secret_key)
        key = hashlib.sha256(b"boxcar oidc flow\0" + material.encode()).digest()
        self._fernet = Fernet(base64.urlsafe_b64encode(key))

    def seal(self, flow: Flow) -> str:
        """The cookie value for ``flow``."""
        body = {"s": flow.state, "n": flow.nonce, "v": flow.verifier, "next": flow.next}
        return self._fernet.encrypt(json.dumps(body).encode()).decode()

    def open(self, value: str) -> Flow | None:
        """The ``Flow`` sealed in ``value``; None when it is missing, forged, or older than
        ``FLOW_SECONDS``."""
        if not value or len(value) > 4096:
            return None
        try:
            body = json.loads(self._fernet.decrypt(value.encode(), ttl=FLOW_SECONDS))
            return Flow(state=body["s"], nonce=body["n"], verifier=body["v"], next=_safe_next(body.get("next", "/")))
        except (InvalidToken, ValueError, KeyError, TypeError):
            return None


@dataclass
class OIDCClient:
    """Boxcar as a relying party of the provider at ``OIDC_ISSUER``.

    Args:
        settings: ``oidc_issuer``, ``oidc_client_id``, ``oidc_client_secret``, ``oidc_scopes``,
            ``oidc_username_claim``.
        transport: an httpx transport for every request to the provider (default: the network).
    """

    settings: Settings
    transport: httpx.AsyncBaseTransport | None = None
    _metadata: dict[str, Any] = field(default_factory=dict)
    _jwks: dict[str, Any] = field(default_factory=dict)
    _fetched_at: float = 0.0

    @property
    def issuer(self) -> str:
        return self.settings.oidc_issuer.strip().rstrip("/")

    def _http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=HTTP_TIMEOUT, follow_redirects=False, transport=self.transport)

    async def _get_json(self, url: str, what: str, **kwargs: Any) -> dict[str, Any]:
        try:
            async with self._http() as http:
                response = await http.get(url, **kwargs)
        except httpx.HTTPError as exc:
            log.warning("single sign-on: %s at %s failed: %s", what, url, exc)
            raise SSOError("The single sign-on provider could not be reached. Try again later.", 502) from exc
        if response.status_code != 200:
            log.warning("single sign-on: %s at %s answered %d", what, url, response.status_code)
            raise SSOError("The single sign-on provider answered with an error. Try again later.", 502)
        try:
            body = response.json()
        except ValueError as exc:
            raise SSOError("The single sign-on provider answered something that is not JSON.", 502) from exc
        if not isinstance(body, dict):
            raise SSOError("The single sign-on provider answered something unexpected.", 502)
        return body

    async def metadata(self) -> dict[str, Any]:
        """The provider's discovery document (``/.well-known/openid-configuration``), kept for
        ``METADATA_SECONDS``.

        Raises:
            SSOError: 502 when it can't be fetched, or it names another issuer or lacks an
                endpoint this flow needs.
        """
        if self._metadata and time.monotonic() - self._fetched_at < METADATA_SECONDS:
            return self._metadata
        body = await self._get_json(f"{self.issuer}/.well-known/openid-configuration", "discovery")
        if str(body.get("issuer", "")).rstrip("/") != self.issuer:
            log.warning("single sign-on: discovery names issuer %r, OIDC_ISSUER is %r", body.get("issuer"), self.issuer)
            raise SSOError("The single sign-on provider is misconfigured (its issuer differs from OIDC_ISSUER).", 502)
        for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            if not isinstance(body.get(key), str) or not body[key].startswith(("https://", "http://")):
                raise SSOError(f"The single sign-on provider's discovery document has no {key}.", 502)
        self._metadata, self._jwks, self._fetched_at = body, {}, time.monotonic()
        return body

    async def _keys(self, force: bool = False) -> KeySet:
        from joserfc.errors import JoseError
        from joserfc.jwk import KeySet

        if force or not self._jwks:
            meta = await self.metadata()
            self._jwks = await self._get_json(meta["jwks_uri"], "keys")
        try:
            return KeySet.import_key_set(self._jwks)  # type: ignore[arg-type]
        except (JoseError, ValueError, TypeError, KeyError) as exc:
            raise SSOError("The single sign-on provider's keys could not be read.", 502) from exc

    async def start(self, redirect_uri: str, next_url: str) -> tuple[str, Flow]:
        """A new login: the provider's authorization URL to send the browser to, and the
        ``Flow`` to keep until the callback.

        Raises:
            SSOError: the provider's discovery failed (502).
        """
        from authlib.common.security import generate_token
        from authlib.oauth2.rfc6749.parameters import prepare_grant_uri
        from authlib.oauth2.rfc7636 import create_s256_code_challenge

        meta = await self.metadata()
        flow = Flow(state=generate_token(32), nonce=generate_token(32), verifier=generate_token(64), next=next_url)
        url = prepare_grant_uri(
            meta["authorization_endpoint"],
            self.settings.oidc_client_id,
            "code",
            redirect_uri=redirect_uri,
            scope=self.settings.oidc_scopes,
            state=flow.state,
            nonce=flow.nonce,
            code_challenge=create_s256_code_challenge(flow.verifier),
            code_challenge_method="S256",
        )
        return url, flow

    async def finish(self, flow: Flow, redirect_uri: str, params: dict[str, str]) -> tuple[str, str]:
        """The verified user name ("" when the provider gave none usable) and subject (the ID
        token's ``sub``: with ``issuer``, the provider account) of a callback's query ``params``
        for the started ``flow``.

        Raises:
            SSOError: 400 for a wrong or missing ``state`` or ``code``; 403 when the provider
                refused (``error``, e.g. consent denied) or its ID token has no usable ``sub``; 401
                when the ID token does not verify; 502 when the provider can't be reached or fails.
        """
        if not hmac.compare_digest(params.get("state", ""), flow.state):
            log.warning("single sign-on: callback with a state that is not this browser's")
            raise SSOError("This sign-in was not started here, or was started twice. Try again.", 400)
        if params.get("error"):
            error, detail = params["error"][:100], params.get("error_description", "")[:200]
            log.info("single sign-on: the provider refused: %s %s", error, detail)
            words = "consent was denied" if error in ("access_denied", "consent_required") else f"{error}"
            raise SSOError(f"The single sign-on provider did not sign you in: {words}.", 403)
        code = params.get("code", "")
        if not code:
            raise SSOError("The single sign-on provider sent no authorization code. Try again.", 400)
        tokens = await self._exchange(code, flow, redirect_uri)
        claims = await self._verify(tokens, flow)
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject or len(subject) > 255:  # Core §2: at most 255 ASCII
            log.warning("single sign-on: the ID token's sub is missing or unusable: %r", subject)
            raise SSOError("The single sign-on provider's ID token names nobody (no usable sub).", 403)
        name = claims.get(self.settings.oidc_username_claim)
        if not name and tokens.get("access_token"):
            name = await self._userinfo_claim(tokens["access_token"], subject)
        if not isinstance(name, str) or not accounts.USERNAME.match(name):
            log.warning(
                "single sign-on: claim %s of %r is missing or no valid user name: %r",
                self.settings.oidc_username_claim,
                subject,
                name,
            )
            name = ""  # a user bound to this account signs in all the same
        return name, subject

    async def _exchange(self, code: str, flow: Flow, redirect_uri: str) -> dict[str, Any]:
        meta = await self.metadata()
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": flow.verifier,
            "client_id": self.settings.oidc_client_id,
        }
        auth: tuple[str, str] | None = None
        secret = self.settings.oidc_client_secret
        if secret:
            methods = meta.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
            if "client_secret_basic" in methods:  # RFC 6749 §2.3.1: form-encoded, then Basic
                auth = (quote(self.settings.oidc_client_id, safe=""), quote(secret, safe=""))
            else:
                form["client_secret"] = secret
        try:
            async with self._http() as http:
                response = await http.post(
                    meta["token_endpoint"], data=form, auth=auth, headers={"Accept": "application/json"}
                )
        except httpx.HTTPError as exc:
            log.warning("single sign-on: token request failed: %s", exc)
            raise SSOError("The single sign-on provider could not be reached. Try again later.", 502) from exc
        try:
            body = response.json()
        except ValueError:
            body = {}
        if response.status_code != 200 or not isinstance(body, dict) or "error" in body:
            error = body.get("error", "") if isinstance(body, dict) else ""
            log.warning("single sign-on: token endpoint answered %d %s", response.status_code, str(error)[:100])
            if response.status_code == 400 and error:  # invalid_grant: a code used twice, or too old
                raise SSOError("The single sign-on provider refused the sign-in code. Try again.", 400)
            raise SSOError("The single sign-on provider failed to issue tokens. Try again later.", 502)
        if not isinstance(body.get("id_token"), str):
            raise SSOError("The single sign-on provider sent no ID token (is the openid scope asked for?).", 502)
        return body

    async def _verify(self, tokens: dict[str, Any], flow: Flow) -> dict[str, Any]:
        from authlib.oidc.core import CodeIDToken
        from joserfc import jwt
        from joserfc.errors import InvalidKeyIdError, JoseError
        from joserfc.jws import JWSRegistry

        meta = await self.metadata()
        algorithms = [a for a in meta.get("id_token_signing_alg_values_supported") or ["RS256"] if a != "none"]
        registry = JWSRegistry(algorithms=algorithms)
        try:
            try:
                token = jwt.decode(tokens["id_token"], await self._keys(), registry=registry)
            except InvalidKeyIdError:  # the provider rotated its keys since we fetched them
                token = jwt.decode(tokens["id_token"], await self._keys(force=True), registry=registry)
            claims = CodeIDToken(
                token.claims,
                token.header,
                {
                    "iss": {"essential": True, "value": meta["issuer"]},
                    "aud": {"essential": True, "value": self.settings.oidc_client_id},
                },
                {
                    "nonce": flow.nonce,
                    "client_id": self.settings.oidc_client_id,
                    "access_token": tokens.get("access_token"),
                },
            )
            claims.validate(leeway=LEEWAY)
        except (JoseError, ValueError) as exc:
            log.warning("single sign-on: the ID token did not verify: %s", exc)
            raise SSOError("The single sign-on provider's ID token did not verify.", 401) from exc
        return dict(claims)

    async def _userinfo_claim(self, access_token: str, sub: str) -> object:
        meta = await self.metadata()
        endpoint = meta.get("userinfo_endpoint")
        if not isinstance(endpoint, str):
            return None
        info = await self._get_json(endpoint, "userinfo", headers={"Authorization": f"Bearer {access_token}"})
        if info.get("sub") != sub:  # OIDC Core §5.3.2: not the ID token's user
            log.warning("single sign-on: userinfo is of another subject")
            raise SSOError("The single sign-on provider's user info is of another user.", 401)
        return info.get(self.settings.oidc_username_claim)


def oidc_client(request: Request) -> OIDCClient:
    """The app's relying party (made on first use, kept on ``app.state``)."""
    state = request.app.state
    client = getattr(state, "oidc_client", None)
    if client is None:
        client = state.oidc_client = OIDCClient(state.settings)
    return client


def redirect_uri(request: Request) -> str:
    """Where the provider sends the browser back: ``OIDC_REDIRECT_URI``, else this server's
    ``/login/oidc/callback`` as the browser reached it."""
    configured = request.app.state.settings.oidc_redirect_uri
    if configured:
        return configured
    return str(request.base_url).rstrip("/") + routes.LOGIN_OIDC_CALLBACK


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


async def _failed(request: Request, error: SSOError, next_url: str = "/") -> Template:
    response = await render(
        request, "login.html", status_code=error.status_code, next=next_url, flash=str(error), flash_kind="error"
    )
    response.delete_cookie(FLOW_COOKIE, path=routes.LOGIN_OIDC)
    return response


class SSOPages(Controller):
    """``/login/oidc`` (off to the provider) and ``/login/oidc/callback`` (back, logged in)."""

    include_in_schema = False

    @get(routes.LOGIN_OIDC)
    async def start(self, request: Request, next: QueryStr = "/") -> Template | Redirect:
        """Send the browser to the provider, the flow kept in its cookie; 404 when
        ``OIDC_ISSUER`` is not set."""
        settings = request.app.state.settings
        next_url = _safe_next(next)
        if not settings.oidc_issuer:
            return await _failed(request, SSOError("Single sign-on is not configured here.", 404), next_url)
        try:
            url, flow = await oidc_client(request).start(redirect_uri(request), next_url)
        except SSOError as exc:
            return await _failed(request, exc, next_url)
        response = Redirect(url, status_code=303)
        response.set_cookie(
            FLOW_COOKIE,
            FlowSealer(settings).seal(flow),
            max_age=FLOW_SECONDS,
            httponly=True,
            samesite="lax",  # sent on the provider's top-level redirect back, not on cross-site subrequests
            secure=_secure(request),
            path=routes.LOGIN_OIDC,
        )
        return response

    @get(routes.LOGIN_OIDC_CALLBACK)
    async def callback(self, request: Request) -> Template | Redirect:
        """The provider's answer: on success a fresh session cookie (as ``/login`` sets it) and
        the page the login started from; else the login page saying what went wrong."""
        state = request.app.state
        settings = state.settings
        if not settings.oidc_issuer:
            return await _failed(request, SSOError("Single sign-on is not configured here.", 404))
        flow = FlowSealer(settings).open(request.cookies.get(FLOW_COOKIE, ""))
        if flow is None:
            log.warning("single sign-on: callback without a valid flow cookie")
            return await _failed(
                request, SSOError("This sign-in took too long or was not started in this browser. Try again.", 400)
            )
        params = {k: str(v)[:2048] for k, v in request.query_params.items()}
        client = oidc_client(request)
        try:
            username, subject = await client.finish(flow, redirect_uri(request), params)
            user_id = await anyio.to_thread.run_sync(
                functools.partial(
                    accounts.sso_user_id,
                    state.db,
                    username,
                    settings.oidc_create_users,
                    settings.archive_user,
                    issuer=client.issuer,
                    subject=subject,
                    link_existing=settings.oidc_link_existing_users,
                )
            )
        except SSOError as exc:
            return await _failed(request, exc, flow.next)
        if user_id is None:  # sso_user_id logged why
            if not username:
                claim = settings.oidc_username_claim
                error = SSOError(f"The single sign-on provider gave no usable user name ({claim}).", 403)
            else:
                error = SSOError(accounts.SSO_NO_USER, 403)
            return await _failed(request, error, flow.next)
        await anyio.to_thread.run_sync(accounts.end_session, state.db, request.cookies.get(SESSION_COOKIE, ""))
        token = await anyio.to_thread.run_sync(accounts.start_session, state.db, user_id, settings.session_max_age)
        log.info("single sign-on: %s's account %r logged in (user id %s)", client.issuer, subject, user_id)
        response = Redirect(flow.next, status_code=303)
        accounts.set_session_cookie(response, token, settings.session_max_age, _secure(request))
        response.delete_cookie(FLOW_COOKIE, path=routes.LOGIN_OIDC)
        return response
