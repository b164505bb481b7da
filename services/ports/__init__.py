"""What the services ask of the outside world (generator, agent, retriever); adapters implement them."""
