"""Operations: the admin API, audit and usage APIs, metrics and health probes."""
