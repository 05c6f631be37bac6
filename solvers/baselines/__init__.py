"""Baselines the papers compare against: Flux (ALBIC paper §2/§5.2) and COLA (ALBIC paper §5.3)."""
