"""Configuration: the settings models (base models of integrations and experts, sections, the
assembled ``Settings``), reading the file (YAML, ``${VAR}``, problems named by their path and
line), the live holder replaced on reload, and the hints ``check`` prints."""
