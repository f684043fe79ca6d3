"""Docker sandboxes: one container each on one engine, with a warm pool and a network of
their own."""
