class Plan: pass
def plan(): pass
def chinchilla_optimal(): pass
