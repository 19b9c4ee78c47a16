"""Keys and cryptography: encryption at rest (sealing), where the master key and JWT secret come
from (keys), password hashing, and the master-key rotation (rekey, apart from secrets'
rotation)."""
