"""Network checks between nodes: iperf3 throughput, ping latency, path MTU, and their schedule."""
