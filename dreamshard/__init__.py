"""dreamshard: learned placement of embedding tables across devices."""

from dreamshard.errors import DreamshardError, InfeasibleError
from dreamshard.planners import PLANNERS, place
from dreamshard.tables import Table
from dreamshard.tasks import Placement, PlacementTask

__all__ = [
    "PLANNERS",
    "DreamshardError",
    "InfeasibleError",
    "Placement",
    "PlacementTask",
    "Table",
    "place",
]
