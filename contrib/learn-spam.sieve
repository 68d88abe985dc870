require ["vnd.dovecot.pipe", "copy", "imapsieve", "environment", "variables"];
if environment :matches "imap.user" "*" {
  set "user" "${1}";
}
pipe :copy "bayesmail-imap-learn" ["spam", "${user}"];
