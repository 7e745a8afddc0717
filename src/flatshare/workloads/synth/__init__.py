"""Synthetic workload generators: voice calls, coding agents, and the long + short admission case."""

from __future__ import annotations

from flatshare.workloads.synth.agents import AgentProfile, coding_agents
from flatshare.workloads.synth.long_short import long_short
from flatshare.workloads.synth.voice import VoiceProfile, draw_replies, voice_calls

__all__ = ["AgentProfile", "VoiceProfile", "coding_agents", "draw_replies", "long_short", "voice_calls"]
