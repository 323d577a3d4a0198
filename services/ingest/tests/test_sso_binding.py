"""Single sign-on finds its user by the provider account (``iss`` and ``sub``), not by the name the
provider gives (OpenID Connect Core §5.7: ``preferred_username`` is neither unique nor stable).

Against a real database (SQLite and Postgres): a first sign-in creates a user bound to its provider
account; later ones find that user whatever name the provider gives; a first sign-in naming an
existing user (bound to another account, with a password, made by single sign-on before binding,
disabled) is refused, unless the operator allows linking (``OIDC_LINK_EXISTING_USERS``), which binds
an existing user bound to nobody, once; ``boxcar user unlink`` forgets a binding. The browser flow
through a real provider is ``tests/test_sso_oidc.py``.
"""

from __future__ import annotations

import logging

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


def test_the_first_sign_in_creates_a_bound_user_and_later_ones_follow_the_account_not_the_name(db: Database):
    carol = sign_in(db, "carol", "sub-carol")
    assert carol is not None and binding(db, "carol") == (ISSUER, "sub-carol")
    assert accounts.authenticate(db, "carol", "") is None
    assert sign_in(db, "carol", "sub-carol") == carol
    # carol is called "caroline" at the provider now, or nothing usable: still Boxcar's carol, no new user
    assert sign_in(db, "caroline", "sub-carol") == carol
    assert sign_in(db, "", "sub-carol") == carol
    with db.read() as s:
        assert s.scalar(select(User.id).where(User.username == "caroline")) is None
    # the same sub at another provider is another person, and carol is taken
    assert sign_in(db, "carol", "sub-carol", issuer=OTHER_ISSUER) is None


def test_another_provider_account_giving_a_bound_users_name_is_refused(db: Database):
    carol = sign_in(db, "carol", "sub-carol")
    assert sign_in(db, "carol", "sub-mallory") is None
    assert sign_in(db, "carol", "sub-mallory", link=True) is None  # linking binds only users bound to nobody
    assert binding(db, "carol") == (ISSUER, "sub-carol") and sign_in(db, "carol", "sub-carol") == carol


def test_an_existing_user_is_bound_only_when_the_operator_allows_it(db: Database):
    """The takeover binding stops: an admin made with a password, a user single sign-on made before
    users were bound (no password), and a provider account whose name its owner could choose."""
    root = accounts.create_user(db, "root", "a long enough password", role="admin")
    dave = accounts.provision_user(db, "dave")  # as a sign-in before binding (or the proxy header) made him
    for name in ("root", "dave"):
        assert sign_in(db, name, "sub-mallory") is None
        assert binding(db, name) == (None, None)
    assert accounts.authenticate(db, "root", "a long enough password") == root  # the password still works
    # OIDC_LINK_EXISTING_USERS=true: the first sign-in under the name binds it, and only that one
    assert sign_in(db, "root", "sub-root", link=True) == root
    assert sign_in(db, "dave", "sub-dave", link=True, create=False) == dave
    assert binding(db, "root") == (ISSUER, "sub-root") and binding(db, "dave") == (ISSUER, "sub-dave")
    assert sign_in(db, "root", "sub-mallory", link=True) is None
    assert sign_in(db, "root", "sub-root") == root  # bound: no linking needed any more


def test_no_user_a_disabled_one_and_a_bad_name_are_none(db: Database):
    assert sign_in(db, "erin", "sub-erin", create=False) is None  # OIDC_CREATE_USERS=false, no such user
    erin = sign_in(db, "erin", "sub-erin")
    assert erin is not None
    with db.write() as s:
        s.execute(update(User).where(User.id == erin).values(is_active=False))
    assert sign_in(db, "erin", "sub-erin") is None
    frank = accounts.create_user(db, "frank", "a long enough password")
    with db.write() as s:
        s.execute(update(User).where(User.id == frank).values(is_active=False))
    assert sign_in(db, "frank", "sub-frank", link=True) is None and binding(db, "frank") == (None, None)
    assert sign_in(db, "no spaces allowed", "sub-x") is None
    assert sign_in(db, "system", "sub-operator") is None  # the operator's name is nobody's


def test_boxcar_user_unlink_forgets_the_binding(db: Database, monkeypatch):
    carol = sign_in(db, "carol", "sub-carol")
    monkeypatch.setenv("DATABASE_URL", db.url)
    runner = CliRunner()
    done = runner.invoke(cli, ["user", "unlink", "carol"])
    assert done.exit_code == 0, done.output
    assert binding(db, "carol") == (None, None)
    assert sign_in(db, "carol", "sub-carol-at-the-new-provider", issuer=OTHER_ISSUER) is None  # not by name alone
    assert sign_in(db, "carol", "sub-carol-at-the-new-provider", issuer=OTHER_ISSUER, link=True) == carol
    assert runner.invoke(cli, ["user", "unlink", "nobody"]).exit_code == 2


def test_no_user_is_made_whose_name_differs_from_another_only_in_letter_case(db: Database, caplog):
    """``Root`` beside ``root`` would look alike in every list, share and log line: refused by the
    CLI's and the admin page's ``create_user``, by a first single sign-on (its one refusal) and by
    the trusted-header login; the existing user and its name stay as they were."""
    root = accounts.create_user(db, "root", "a long enough password", role="admin")
    try:
        accounts.create_user(db, "Root", "another long password")
    except accounts.AccountError as exc:
        assert "'root' exists already" in str(exc)
    else:
        raise AssertionError("Root was created beside root")
    with caplog.at_level(logging.WARNING):
        assert sign_in(db, "ROOT", "sub-mallory") is None
    assert "user 'root' has that name in other letter case" in caplog.text  # the operator learns why
    assert accounts.named_user_id(db, "rOOt", create=True) is None
    with db.read() as s:
        assert list(s.scalars(select(User.username))) == ["root"]
    assert accounts.authenticate(db, "root", "a long enough password") == root
    # other names still are made, and the same name in the same case is still found
    assert sign_in(db, "rooty", "sub-rooty") is not None
    assert accounts.named_user_id(db, "root", create=True) == root
