"""Background work a broker does on its own: check-back rounds and push checks
(:mod:`.checkback`), and releasing delayed messages when their time comes (:mod:`.delays`)."""
