"""The kopf entry and the process: handlers, start-up, leader election, the controller loop, probes."""
