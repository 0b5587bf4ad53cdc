"""The trivial handler of bench/endpoint, deployed with `berth deploy app.py:hello`."""

from berth import endpoint


def greet(name: str = "world") -> dict:
    return {"hello": name}


@endpoint(name="bench-hello", keep_warm_seconds=600, concurrent_requests=16)
def hello(name: str = "world") -> dict:
    return greet(name)
