"""An installed app (tests/broken_settings.py only) whose jobs module raises ImportError when imported."""
