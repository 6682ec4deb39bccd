"""Prints a TCP port that is free on 127.0.0.1 now and lies below the kernel's ephemeral range, so
that no outgoing connection (of this test or of one running beside it) can take it before the
broker binds it. Used by the scripts that start a broker on a port of their own.
"""
import random
import socket

try:
    ephemeral = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError, IndexError):
    ephemeral = 32768
low, high = 20000, ephemeral - 1
for _ in range(500):
    port = random.randint(low, high) if high > low else 0
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        print(probe.getsockname()[1])
        break
else:
    raise SystemExit("free_port: no free port between %d and %d" % (low, high))
