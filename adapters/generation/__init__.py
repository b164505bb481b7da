"""What generates: the offline and OpenAI-compatible generators and agents."""
