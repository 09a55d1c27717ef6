"""Standard-library-only verl reward functions."""
