"""Configuration: the settings models, reading the file (YAML, ``${VAR}``), the live holder
replaced on reload, and the hints ``check`` prints."""
