"""Background work a broker does on its own: check-back rounds and push checks
(:mod:`.checkback`), releasing delayed messages when their time comes (:mod:`.delays`), purge
rounds (:mod:`.retention`), and this broker's beat in the list of brokers (:mod:`.presence`)."""
