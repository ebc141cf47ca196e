// An empty translation unit, for targets that exist for their compile options (a precompiled header).
