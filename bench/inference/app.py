"""The model the inference bench serves: the tests' word bigram model
(test/fixtures/inference/bigram_app.py, copied next to this file as
bigram_app.py with its corpus), one warm container taking 16 requests at once."""

from berth import QueueDepthAutoscaler, asgi
from bigram_app import make_app


@asgi(name="bench-model", served_models=["bench-bigram"], cpu=1.0, memory=256, concurrent_requests=16,
      keep_warm_seconds=600, autoscaler=QueueDepthAutoscaler(max_containers=1))
def model():
    return make_app()
