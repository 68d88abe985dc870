require ["vnd.dovecot.pipe", "copy", "imapsieve", "environment", "variables"];
if environment :matches "imap.mailbox" "*" {
  set "mailbox" "${1}";
}
# Thrown away from Junk is not rescued: nothing to learn. Trash as
# clients name it; add the name yours use.
if string :is "${mailbox}" ["Trash", "Deleted Messages", "Deleted Items"] {
  stop;
}
if environment :matches "imap.user" "*" {
  set "user" "${1}";
}
pipe :copy "bayesmail-imap-learn" ["ham", "${user}"];
