"""Prefect flows over the dreamshard library: collect costs, train, evaluate, the pipeline.

Importing this package sets the project's own defaults before Prefect or MLflow load: no
telemetry, and Prefect's home in the state folder (ephemeral mode needs no server).
"""

import os

from dreamshard.state import state_dir

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("PREFECT_HOME", str(state_dir() / "prefect"))
# the ephemeral server migrates its database on first use: slow on a busy 2-core machine
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
