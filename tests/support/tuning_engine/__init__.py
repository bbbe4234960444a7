"""An engine serving one of three models whose best settings are known, for the tuning tool's tests:
`python -m tuning_engine sleeper|gil|batch`."""
