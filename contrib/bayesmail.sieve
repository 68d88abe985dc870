require ["vnd.dovecot.filter", "fileinto", "mailbox"];
filter "bayesmail";
if header :is "X-Spam-Flag" "YES" {
  fileinto :create "Junk";
  stop;
}
