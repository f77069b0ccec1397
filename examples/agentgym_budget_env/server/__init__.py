"""The server of the agentgym-budget OpenEnv environment (``server.app:app``)."""
