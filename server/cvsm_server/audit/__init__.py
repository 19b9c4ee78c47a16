"""The audit log: entries (log), the hash chains and checkpoints (chain), and read insights drawn
from it (insights)."""
