"""Protected KV from the CPU tier: settings of vLLM's offloading connector for latency-critical requests
(synchronous loads, a tier that keeps their prefix), and vLLM-side classes that carry them out."""
