"""Demand from Prometheus: the readings, the PromQL confinement, the hysteresis that turns them into planned demand."""
