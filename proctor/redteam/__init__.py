"""proctor.redteam: scripted attackers run against every task before anyone trains on it."""

from .attacks import ATTACKS, Attack, applicable
from .run import RedteamRow, run_redteam

__all__ = ["ATTACKS", "Attack", "RedteamRow", "applicable", "run_redteam"]
