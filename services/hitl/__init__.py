"""Human in the loop: pause a run for a person, resume it, expire it; signals on JetStream."""
