"""The co-location experiment (the main job): a voice agent beside coding agents under stock vLLM
and make-room, on the first seed's setup; an instance of `flatshare.lab`."""
