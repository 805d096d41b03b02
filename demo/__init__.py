"""`make demo`: the main job of llmao fleet on one machine, from nothing to a routed chat.

A CA and llmao-server over HTTPS; boxes that boot and pull their assignment (containers when
an engine is available, else local processes, one loopback address each); the real LiteLLM
proxy; reconcile once and then on an interval. `python -m demo stop` undoes all of it.

    python -m demo          # start (LLMAO_DEMO_BOXES=local|container|auto, default auto)
    python -m demo stop     # stop everything the demo started

Modules: tls (CA and certificate), fleet (the demo's config files, from inventories/local),
boxes (container or local boxes), services (llmao-server, LiteLLM), reconcile (once and the
background loop), processes (the PID record), run (the steps, and stop).
"""
