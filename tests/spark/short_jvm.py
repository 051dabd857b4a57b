"""JVM options for the tests' Spark: tiny jobs in a JVM that lives minutes. Compiling with C1
only and collecting garbage on one thread took a fifth less CPU for the same tests."""

SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
