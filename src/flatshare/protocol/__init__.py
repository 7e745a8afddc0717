"""What flatshare exchanges with OpenAI-compatible (vLLM) servers, written once.

Each module is one wire contract, read or written by several parts of flatshare (the gateway, the replay
driver, the admission experiment, the fidelity probes, the simulator and serve-sim):

- `metrics`: a `/metrics` page (Prometheus text) and how samples of several engines combine;
- `models`: a `/v1/models` answer (the served model and its `max_model_len`);
- `sse`: a streamed `/v1/completions` answer (server-sent events, tokens counted per chunk);
- `tokens`: the prompt token ids flatshare makes up (word pieces, hashes, the special ids 0-3).

The package is named for what the modules share (the protocol between flatshare and a server), not for
a user of it; `flatshare.serve.protocol` is serve-sim's validation of the request bodies it receives.
"""
