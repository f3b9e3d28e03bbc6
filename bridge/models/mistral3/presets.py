"""Mistral 3 vision-language presets (filled below with the published configs' values)."""
