"""Configuration: every settings model (base models of integrations and experts, sections, routes,
budgets, platform limits, watches, schedules and their cron, event sources, the assembled
``Settings``), reading the file (YAML, ``${VAR}``, problems named by their path and line), and
the live holder replaced on reload."""
