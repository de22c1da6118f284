"""Accounts that may sign in to the admin page; passwords stored as scrypt hashes."""

from __future__ import annotations

from datetime import UTC, datetime

from werkzeug.security import check_password_hash, generate_password_hash

from lucid_hub.db.models import AdminAccount
from lucid_hub.db.session import Database
from lucid_hub.errors import ConflictError, InputError

MIN_PASSWORD = 12
_DUMMY_HASH = generate_password_hash("not a password")


class AdminAccounts:
    def __init__(self, db: Database) -> None:
        self.db = db

    def create(self, username: str, password: str) -> None:
        if not username or len(username) > 255 or any(c.isspace() for c in username):
            raise InputError("a username is 1-255 characters without spaces")
        if len(password) < MIN_PASSWORD:
            raise InputError(f"the password must have at least {MIN_PASSWORD} characters")
        with self.db.session() as session:
            if session.get(AdminAccount, username) is not None:
                raise ConflictError(f"admin account {username!r} exists")
            session.add(AdminAccount(username=username, password_hash=generate_password_hash(password),
                                     created_at=datetime.now(UTC)))

    def verify(self, username: str, password: str) -> bool:
        """Whether the password is the account's (as much work when the account does not exist)."""
        with self.db.session() as session:
            row = session.get(AdminAccount, username[:255])
            stored = row.password_hash if row is not None else None
        if stored is None:
            check_password_hash(_DUMMY_HASH, password)
            return False
        return check_password_hash(stored, password)
