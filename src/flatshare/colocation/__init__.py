"""The co-location experiment (the main job): a voice agent beside coding agents under stock vLLM
and make-room, on the write-up's setup; an instance of `flatshare.lab`."""
