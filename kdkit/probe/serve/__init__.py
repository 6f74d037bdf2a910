"""``kdkit serve-test``: an interactive service measured before it is paid for: open-loop arrivals,
a batcher, the behaviour at capacity, every request's record, latency percentiles with queue time
apart, and the configuration that meets both the quality criterion and the latency objective."""
