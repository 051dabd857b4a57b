"""The kpd process: settings, Kafka clients, leader election, local storage, CLI."""
