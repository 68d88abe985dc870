require ["vnd.dovecot.pipe", "copy", "imapsieve", "environment", "variables"];
if environment :matches "imap.mailbox" "*" {
  set "mailbox" "${1}";
}
# Thrown away from Junk is not rescued: nothing to learn.
if string :is "${mailbox}" "Trash" {
  stop;
}
if environment :matches "imap.user" "*" {
  set "user" "${1}";
}
pipe :copy "bayesmail-imap-learn" ["ham", "${user}"];
