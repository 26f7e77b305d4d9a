"""Configuration: Hydra composition over the package's conf/ and the user's config dirs
(compose.py), the structured configs checked at compose time (schema.py, groups.py), ranges.py."""
