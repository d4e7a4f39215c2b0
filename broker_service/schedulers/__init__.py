"""Background work a broker does on its own: check-back rounds and push checks
(:mod:`.checkback`), releasing delayed messages when their time comes (:mod:`.delays`), purge
rounds (:mod:`.retention`), this broker's beat in the list of brokers (:mod:`.presence`), and the
ACL's hot reload (:mod:`.acl_reload`)."""
