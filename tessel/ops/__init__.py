"""The operator library and its numpy reference implementations."""
