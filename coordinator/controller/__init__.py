"""The controller of a replicated cluster and the coordination service it keeps its state in (ZooKeeper):
broker registrations, the elected controller, partition leaders, leader epochs and ISRs, written with
versioned updates so that a stale writer's change fails."""
