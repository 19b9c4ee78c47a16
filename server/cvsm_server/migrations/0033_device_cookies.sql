-- 0.5: device cookies for the per-account wait (issue 42, OWASP "Slow down online guessing
-- attacks with device cookies").
--
-- A successful sign-in sets a signed cookie naming the account and its `device_generation`
-- (accounts/devices.py). During the account's wait after repeated wrong passwords, a sign-in from
-- a browser holding a valid cookie for that account is checked as usual (its own wrong passwords
-- counted against the cookie, in `auth_throttle` under `device:<nonce>`), while one without is
-- refused with 429. A password reset, "sign out everywhere" and whatever else ends all of an
-- account's credentials bumps the generation: every device cookie issued before stops counting.
ALTER TABLE users ADD COLUMN device_generation integer NOT NULL DEFAULT 0;
