"""Single sign-on finds its user by the provider account (``iss`` and ``sub``), not by the name the
provider gives (OpenID Connect Core §5.7: ``preferred_username`` is neither unique nor stable).

Against a real database (SQLite and Postgres): a first sign-in binds the user it creates or finds;
later ones find that user whatever name the provider gives; another provider account giving the
same name is refused, and so is one naming a user with a password unless the operator allows
linking (``OIDC_LINK_EXISTING_USERS``); users made for single sign-on before binding existed are
bound by their next sign-in; ``boxcar user unlink`` forgets a binding. The browser flow through a
real provider is ``tests/test_sso_oidc.py``.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sqlalchemy import select, update

from boxcar.cli.main import cli
from boxcar.ingest.web import accounts
from boxcar.shared.db import Database
from boxcar.shared.db.models import User

ISSUER = "https://sso.example.lan"
OTHER_ISSUER = "https://other-sso.example.lan"


def sign_in(db: Database, name: str, subject: str, *, issuer: str = ISSUER, create: bool = True, link: bool = False):
    return accounts.sso_user_id(db, name, create, issuer=issuer, subject=subject, link_existing=link)


def binding(db: Database, name: str) -> tuple[str | None, str | None]:
    with db.read() as s:
        row = s.execute(select(User.oidc_issuer, User.oidc_subject).where(User.username == name)).one()
    return row.oidc_issuer, row.oidc_subject


def test_the_first_sign_in_binds_and_later_ones_follow_the_account_not_the_name(db: Database):
    carol = sign_in(db, "carol", "sub-carol")
    assert carol is not None and binding(db, "carol") == (ISSUER, "sub-carol")
    assert sign_in(db, "carol", "sub-carol") == carol
    # carol is called "caroline" at the provider now: still Boxcar's carol, and no new user
    assert sign_in(db, "caroline", "sub-carol") == carol
    with db.read() as s:
        assert s.scalar(select(User.id).where(User.username == "caroline")) is None
    # the same sub at another provider is another person
    with pytest.raises(accounts.AccountError, match="belongs to another single sign-on account"):
        sign_in(db, "carol", "sub-carol", issuer=OTHER_ISSUER)


def test_another_provider_account_giving_a_bound_users_name_is_refused(db: Database):
    carol = sign_in(db, "carol", "sub-carol")
    with pytest.raises(accounts.AccountError, match="belongs to another single sign-on account"):
        sign_in(db, "carol", "sub-mallory")
    with pytest.raises(accounts.AccountError):  # the operator allowing links to password users changes nothing
        sign_in(db, "carol", "sub-mallory", link=True)
    assert binding(db, "carol") == (ISSUER, "sub-carol") and sign_in(db, "carol", "sub-carol") == carol


def test_a_user_with_a_password_is_bound_only_when_the_operator_allows_it(db: Database):
    """The takeover binding stops: an admin made with a password, and a provider account whose name
    its owner could choose."""
    root = accounts.create_user(db, "root", "a long enough password", role="admin")
    with pytest.raises(accounts.AccountError, match="signs in with a password"):
        sign_in(db, "root", "sub-mallory")
    assert binding(db, "root") == (None, None)
    assert accounts.authenticate(db, "root", "a long enough password") == root  # the password still works
    # OIDC_LINK_EXISTING_USERS=true: the first sign-in under the name binds it, and only that one
    assert sign_in(db, "root", "sub-root", link=True) == root
    assert binding(db, "root") == (ISSUER, "sub-root")
    with pytest.raises(accounts.AccountError, match="belongs to another"):
        sign_in(db, "root", "sub-mallory", link=True)


def test_users_made_for_single_sign_on_before_binding_are_bound_by_their_next_sign_in(db: Database):
    dave = accounts.provision_user(db, "dave")  # as a sign-in before this change (or the proxy header) made him
    assert binding(db, "dave") == (None, None)
    assert sign_in(db, "dave", "sub-dave", create=False) == dave
    assert binding(db, "dave") == (ISSUER, "sub-dave")
    with pytest.raises(accounts.AccountError, match="belongs to another"):
        sign_in(db, "dave", "sub-eve", create=False)


def test_no_user_a_disabled_one_and_a_bad_name_are_none(db: Database):
    assert sign_in(db, "erin", "sub-erin", create=False) is None  # OIDC_CREATE_USERS=false, no such user
    erin = sign_in(db, "erin", "sub-erin")
    assert erin is not None
    with db.write() as s:
        s.execute(update(User).where(User.id == erin).values(is_active=False))
    assert sign_in(db, "erin", "sub-erin") is None
    assert sign_in(db, "no spaces allowed", "sub-x") is None


def test_boxcar_user_unlink_forgets_the_binding(db: Database, monkeypatch):
    carol = sign_in(db, "carol", "sub-carol")
    monkeypatch.setenv("DATABASE_URL", db.url)
    runner = CliRunner()
    done = runner.invoke(cli, ["user", "unlink", "carol"])
    assert done.exit_code == 0, done.output
    assert binding(db, "carol") == (None, None)
    assert sign_in(db, "carol", "sub-carol-at-the-new-provider", issuer=OTHER_ISSUER) == carol
    assert runner.invoke(cli, ["user", "unlink", "nobody"]).exit_code == 2
