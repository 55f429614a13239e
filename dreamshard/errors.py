"""The one exception type a user can cause, and its infeasibility flavour."""


class DreamshardError(Exception):
    """A problem the user can fix (bad file, impossible memory cap, unknown name).

    The CLI prints its message as one line on stderr and exits with code 2.
    """


class InfeasibleError(DreamshardError):
    """No legal placement exists (or none could be found) under the memory caps."""


class IllegalPlanError(DreamshardError):
    """A plan read as written that breaks its task (a rank outside the devices, a table
    missing, shards past a table's edge, overlapping or leaving a gap): `dreamshard check`
    reports it as an illegal plan (exit 1), not as one it could not read (exit 2)."""
