require ["vnd.dovecot.filter", "fileinto", "mailbox"];
# Only a message bayesmail passed on carries our flag alone: where it could
# not be run or gave up (exit 75), the message goes on as it came, and a
# flag in it is the sender's.
if filter "bayesmail" {
  if header :is "X-Spam-Flag" "YES" {
    fileinto :create "Junk";
    stop;
  }
}
