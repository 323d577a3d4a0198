"""app_user.oidc_issuer / oidc_subject: the provider account a single sign-on user is bound to

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06 02:30:00

A single sign-on used to find its Boxcar user by the provider's user name claim
(``preferred_username``), which OpenID Connect Core §5.7 says is not unique and may change: a
person who could pick that name at the provider signed in as the Boxcar user of that name, an
admin included. A user is now bound to one provider account, the ID token's ``iss`` and ``sub``
(§2: the pair that identifies an end user), on their first single sign-on. Existing users are
bound to none: the next single sign-on under their name binds them, under the rules in
``ingest/web/accounts.sso_user_id``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("app_user") as batch:
        batch.add_column(sa.Column("oidc_issuer", sa.String(length=512), nullable=True))
        batch.add_column(sa.Column("oidc_subject", sa.String(length=255), nullable=True))
    op.create_index("uq_app_user_oidc_issuer_subject", "app_user", ["oidc_issuer", "oidc_subject"], unique=True)


def downgrade() -> None:
    op.drop_index("uq_app_user_oidc_issuer_subject", table_name="app_user")
    with op.batch_alter_table("app_user") as batch:
        batch.drop_column("oidc_subject")
        batch.drop_column("oidc_issuer")
