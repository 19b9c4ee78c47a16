"""Accounts and sign-in: users, sessions, API tokens and the credential cache, TOTP, OAuth, email
verification, password reset, account deletion and the first administrator's setup link."""
