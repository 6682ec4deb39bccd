"""A flood that goes on until the broker drops the flooder, for hostile_client.py and
flood_per_key.py.
"""
import json
import time


def flood_until_dropped(socket):
    """Sends LISTs at ~5,000 a second (ten times the default limit), reading answers as it goes, until
    the broker has been silent for 3 s after at least 5 s of flooding (it dropped the peer), so that
    a slow or loaded broker only makes it longer. Returns (messages sent, seconds)."""
    start = time.monotonic()
    last_answer = start
    sent = 0
    while True:
        now = time.monotonic()
        if now - start >= 5.0 and now - last_answer >= 3.0:
            return sent, now - start
        assert now - start < 120.0, "flooded for 120 s and the broker still answers"
        for _ in range(100):
            socket.send_multipart([b"TESSERA/1", b"\x22", json.dumps({"id": sent}).encode()])
            sent += 1
        while socket.poll(0):  # read as we go, so that the broker's answers are not what slows us
            socket.recv_multipart()
            last_answer = time.monotonic()
        time.sleep(0.02)
