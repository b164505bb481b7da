"""Conversations: start, add messages, retitle, delete; list, search, stats, export."""
