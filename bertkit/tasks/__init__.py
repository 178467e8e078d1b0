"""What a task plugin implements: the head contract and multi-task composition."""
