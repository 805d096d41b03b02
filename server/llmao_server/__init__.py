"""llmao's config server: the box API, the fleet's observed state, the dashboard."""
