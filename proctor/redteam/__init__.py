"""proctor.redteam: scripted attackers run against every task before anyone trains on it."""

from .attacks import ATTACKS, Attack, applicable, environment_attacks
from .derivability import HiddenParts, derivability_attack
from .run import RedteamRow, run_redteam

__all__ = ["ATTACKS", "Attack", "HiddenParts", "RedteamRow", "applicable", "derivability_attack", "environment_attacks", "run_redteam"]
