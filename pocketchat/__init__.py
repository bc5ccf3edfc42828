"""pocketchat: pick, fetch and chat with the POCKET build that fits this machine."""

__version__ = "0.1.0"
